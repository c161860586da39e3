"""The core: plain data and formats every layer shares (no policy, no I/O beyond loading files)."""
