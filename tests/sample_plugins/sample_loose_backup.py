"""A test plugin whose backup is careless with modes: it copies a world-readable file with its mode and
opens up a folder. It also notes, while it runs, the mode of the backup folder it writes into."""

import json
import os
import shutil

from persmem_core import hookimpl


@hookimpl
def backup(host, dest):
    source = host.data_dir("loose") / "public.txt"
    source.write_text("readable by all at the source")
    os.chmod(source, 0o644)
    shutil.copy2(source, dest / "public.txt")  # keeps 0644
    (dest / "open").mkdir()
    os.chmod(dest / "open", 0o755)
    (dest / "plain.txt").write_text("written the ordinary way")
    seen = {"backup_folder_mode": oct(os.stat(dest.parent).st_mode & 0o777),
            "plain_file_mode": oct(os.stat(dest / "plain.txt").st_mode & 0o777)}
    (dest / "seen.json").write_text(json.dumps(seen))
