"""Helper process: waits for the go file, then tries to claim every message of wren's inbox; prints what it won."""

import json
import os
import sys
import time
from pathlib import Path

from persmem_amq_maildir.maildir import Mailbox

box, go = Mailbox(Path(sys.argv[1]), 4_000_000), Path(sys.argv[2])
names = box.names("new")
while not go.exists():
    time.sleep(0.001)
won = [name for name in names if box.claim(name)]
print(json.dumps({"pid": os.getpid(), "won": won}))
