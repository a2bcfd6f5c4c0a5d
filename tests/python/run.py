"""Runs one pytest file; exit code 77 (ctest's "skipped") when pytest itself is missing."""
import sys

try:
    import pytest
except ImportError:
    print("SKIPPED: pytest is not installed in this Python; run scripts/setup.sh")
    sys.exit(77)

code = pytest.main(["-q", "-rs", sys.argv[1]])
# pytest's exit code 5 means "no tests collected": that is a failure here.
sys.exit(1 if code == 5 else int(code))
