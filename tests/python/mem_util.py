"""Memory measurements the tests share: the process's resident set, and whether it means anything.

Under AddressSanitizer (the asan lane preloads libasan) freed memory waits in ASan's quarantine
(256 MB by default) before it is reused, so RSS grows with every allocation a test makes and
says nothing about the engine. Tests that bound RSS growth still run there for everything else
they check; the bound itself is checked in the lanes without ASan."""


def rss_kb():
    """The process's resident set size in kB (VmRSS)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def asan_loaded():
    """Whether AddressSanitizer's runtime is in this process."""
    with open("/proc/self/maps") as fh:
        return any("libasan" in line for line in fh)


def assert_rss_growth_below(grown_kb, bound_kb, what):
    """RSS grew by `grown_kb` over `what`: at most `bound_kb` (not checked under ASan, see above)."""
    if asan_loaded():
        return
    assert grown_kb < bound_kb, f"RSS grew by {grown_kb} kB over {what}"
