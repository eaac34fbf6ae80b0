"""The package's release; __version__ adds the commit dp was built from (PEP 440's local part)."""
RELEASE = "0.1.0"
