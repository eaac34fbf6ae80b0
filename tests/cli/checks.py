"""A tally of named checks for the CLI test scripts: failures are printed with their detail, and
the closing line is "N passed, N failed" (ctest reads the exit code)."""
import sys


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, cond, detail=""):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {name} {detail}")

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)
