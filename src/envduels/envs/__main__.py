"""`python -m envduels.envs [--rehash]`: list the library, or refresh its manifest hashes."""

from envduels.envs._library import main

raise SystemExit(main())
