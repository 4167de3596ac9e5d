"""`envduels view`: a live local web viewer of run folders (read-only, loopback by default).

`create_app(run_dirs)` is the Starlette app (pages: runs, a run's overview, its environments, an
environment, an episode, a player; `live.json` for pages that update themselves);
`view_command` serves it with uvicorn. See docs/viewer.md.
"""

from envduels.view._app import create_app
from envduels.view.commands import view_command

__all__ = ["create_app", "view_command"]
