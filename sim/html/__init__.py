"""Self-contained HTML reports (`report.html`) of run, compare, sweep, search, serve and serve-search.

One file per results directory: styles and the sortable-table script inline, charts as inline SVG drawn
by sim.html.svg, the topology picture (if any) as a base64 `data:` PNG. Opening it makes no network
request (the page's Content-Security-Policy forbids any). Importing this package imports neither
matplotlib nor pandas; builders take the objects the commands already hold.

Modules: page (page shell, tables, CSS/JS), svg (chart helpers), run_report (run), compare_report
(compare, sweep), search_report (search), serve_report (serve, serve-search).
"""

REPORT_FILE = "report.html"
