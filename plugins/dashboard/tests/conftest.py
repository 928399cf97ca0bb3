import os
from pathlib import Path

import pytest

from dashfixtures import ARTIFACTS, tool
from persmem_core.sdk.testing import browser_page, chromium_browser, clean_env, start_server, write_config

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dashhome")
    write_config(home, {"amq": {"readers": {"operator": ["*"]}}})
    env = clean_env(home, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
                    PERSMEM_PLUGIN_MODULES="panel_plugin_for_tests", PERSMEM_DISABLE_PLUGINS="shell,git,searxng")
    running = start_server(home, ("kite", "wren", "operator"), env)
    seed(running)
    yield running
    running.stop()


def seed(server):
    def store(agent, **args):
        return tool(server, "memory_store", args, agent)

    store("kite", content="Deploys go out on Tuesdays after the standup.", project="ops", memory_type="decision",
          tags="deploy,process")
    store("wren", content="The billing retry job double-charged two customers in March.", project="billing",
          memory_type="bug", tags="billing,incident")
    store("kite", content="<script>alert('stored xss')</script> an assistant was told to store this", project="sec",
          memory_type="note", tags="xss")
    first = store("wren", content="Cache TTL is 5 minutes.", project="ops", memory_type="decision", tags="cache")
    tool(server, "memory_update", {"memory_id": first["id"], "content": "Cache TTL is 10 minutes."}, agent="wren")
    tool(server, "amq_send", {"to_agent": "wren", "subject": "Review please",
                                  "body": "Can you review the cache change?", "kind": "review_request"}, agent="kite")


@pytest.fixture(scope="module")
def browser():
    with chromium_browser(ARTIFACTS) as chromium:
        yield chromium


@pytest.fixture
def page(browser):
    with browser_page(browser) as page:
        yield page
