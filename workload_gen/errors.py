"""User-facing errors of workload_gen: one line naming the field (or file and key) and the rule."""


class WorkloadError(ValueError):
    """Invalid model, plan or workload input. The message is one line, shown to the user as is."""


class PlanError(WorkloadError):
    """An invalid parallel plan; the message names the field and the rule it breaks."""


class ConfigFileError(WorkloadError):
    """A malformed model/plan file; the message names the file and the key."""
