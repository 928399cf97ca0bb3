"""Helper process for the kill-9 sweep: sends messages in a loop and prints each acknowledged id."""

import sys
from pathlib import Path

from persmem_amq_maildir.config import AmqConfig
from persmem_amq_maildir.store import MailStore

store = MailStore(Path(sys.argv[1]), AmqConfig(agents=["kite", "wren"])).open()
print("ready", flush=True)
i = 0
while True:
    result = store.send("kite", "wren", f"message {i} " + "x" * (i % 3000), subject=f"n{i}")
    print(f"S {result['id']} {i}", flush=True)
    i += 1
