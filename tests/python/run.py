"""Runs one pytest file for ctest. Exit code 77 (ctest's "skipped") when pytest itself is missing or
when every test of the file skipped (a missing browser, say): such a file is reported skipped,
never passed. A module-level `pytest.skip(..., allow_module_level=True)` is how a file skips
whole (`pytest.exit(returncode=77)` at import is a collection error in newer pytest)."""
import sys

try:
    import pytest
except ImportError:
    print("SKIPPED: pytest is not installed in this Python; run scripts/setup.sh")
    sys.exit(77)


class Outcomes:
    """Counts what ran: tests that passed or failed, and tests or modules that skipped."""

    def __init__(self):
        self.ran = 0
        self.skipped = 0

    def pytest_collectreport(self, report):
        if report.skipped:
            self.skipped += 1

    def pytest_runtest_logreport(self, report):
        if report.skipped and not hasattr(report, "wasxfail"):  # an xfail ran: not a skip
            self.skipped += 1
        elif report.when == "call":
            self.ran += 1


outcomes = Outcomes()
code = pytest.main(["-q", "-rs", sys.argv[1]], plugins=[outcomes])
# Nothing ran but something skipped (a skipped module collects no test: pytest says 5).
if code in (0, 5) and outcomes.ran == 0 and outcomes.skipped > 0:
    sys.exit(77)
# pytest's exit code 5 means "no tests collected": that is a failure here.
sys.exit(1 if code == 5 else int(code))
