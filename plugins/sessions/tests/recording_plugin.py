"""A tiny plugin for tests: answers `index_session_turns` by writing each call (agent and turns) as one JSON line
to $PERSMEM_TEST_RECORD, and fails while the file $PERSMEM_TEST_RECORD.fail exists (a memory side that is down)."""

import json
import os
from pathlib import Path

from persmem_core.sdk import hookimpl


@hookimpl
def index_session_turns(agent, turns):
    record = Path(os.environ["PERSMEM_TEST_RECORD"])
    if Path(str(record) + ".fail").exists():
        raise RuntimeError("the test's memory side is down")
    with open(record, "a") as f:
        f.write(json.dumps({"agent": agent, "turns": turns}) + "\n")
    return len(turns)
