"""A third-party plugin that only adds a dashboard panel (loaded with PERSMEM_PLUGIN_MODULES)."""

import anyio

from persmem_core.sdk import hookimpl

TEMPLATE = """<p id="weather">Forecast for {{ data.city }}: {{ data.sky }}</p>"""


async def forecast_events(view):
    """One event, then silence: a stream that only a watcher can end."""
    yield {"event": "forecast", "data": f'"clear, for {view.agent}"'}
    await anyio.sleep_forever()


@hookimpl
def register_panels(register, host):
    register("weather", title="Weather", template=TEMPLATE,
             context=lambda view: {"city": "Kite Hill", "sky": f"clear, asked by {view.agent} <b>"}, order=50,
             events=forecast_events)
