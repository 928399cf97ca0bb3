"""Helper process for the reseal kill -9 sweep: reseals a home's session archive over and over, cycling through
sealed under key A, plaintext, sealed under key B (both keys on hand), and prints each pass it finished.

    python resealer_for_kill.py HOME KEY_A_HEX KEY_B_HEX FIRST_STEP"""

import sys
from pathlib import Path

from persmem_core.sdk.testing import key_id
from persmem_core.sdk import Sealer
from persmem_sessions.reseal import reseal_sessions

home, keys = Path(sys.argv[1]), [bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3])]
ring = {key_id(k): k for k in keys}
targets = [Sealer(ring, key_id(keys[0]), True), Sealer(ring, None, False), Sealer(ring, key_id(keys[1]), True)]
step = int(sys.argv[4])
print("ready", flush=True)
while True:
    report = reseal_sessions(home / "sessions", targets[step % 3], lambda *_: None, False)
    print(f"R {step} {report.rewritten}", flush=True)
    step += 1
