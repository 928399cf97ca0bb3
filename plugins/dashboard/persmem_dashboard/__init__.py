"""persmem-plugin-dashboard: the web dashboard's shell (layout, navigation, login, static assets); the
panels come from plugins through the `register_panels` hook.

- `config.py`   the [dashboard] section
- `panels.py`   the panel contract (what `register_panels` receives) and collecting panels from plugins
- `charts.py`   donut and bar charts as SVG, rendered on the server with pygal (no JavaScript, no CDN)
- `app.py`      the Litestar app: login, CSRF, security headers, panel pages, event streams
- `sessions.py` login sessions: none stored before login, a new id at each login, deleted at logout, swept
- `streams.py`  event streams that end within a moment of their agent's revocation
- `system.py`   the dashboard's own panel: plugins, doctor, agents
- `plugin.py`   the pluggy hooks
"""
