"""persmem-plugin-dashboard: the web dashboard's shell (layout, navigation, login, static assets); the
panels come from plugins through the `register_panels` hook, which the dashboard declares.

- `plugin.py`   the pluggy hooks (only hooks): declare `register_panels`, mount the app, the [dashboard] section,
                the System panel, CLI, doctor
- `hookspecs.py` `register_panels`: the hook other plugins answer with their panels
- `config.py`   the [dashboard] section
- `service.py`  what the app serves, gathered once when it is mounted: the panels, their problems, the settings,
                the CSRF secret and the sessions folder
- `app.py`      the Litestar app: login, CSRF, security headers, panel pages, event streams
- `lazy_app.py` the app as `persmem serve` mounts it: built on its first request (its libraries take ~1 s to
                import, which a restarted server's first search would wait for)
- `commands.py` `persmem dashboard`: the app alone, without MCP
- `system.py`   the dashboard's own panel: plugins, problems, doctor, agents
- `panels.py`   the panel contract (what `register_panels` receives) and collecting panels from plugins
                (one panel id, two plugins: the server stops)
- `sessions.py` login sessions: none stored before login, a new id at each login, deleted at logout, swept
- `streams.py`  event streams that end within a moment of their agent's revocation
- `charts.py`   donut and bar charts as SVG, rendered on the server with pygal (no JavaScript, no CDN)
- `markdown.py` Markdown (mail bodies, notes) as HTML that is safe to put in a page
- `templates/`  the layout, login and panel page templates (Jinja)
- `static/`     the stylesheet and the icon the pages load (served by the app, no CDN)
"""
