"""Test code run in several threads at once."""
import sys
import threading


def run_threads(work, args_list, switch_interval=None):
    """Runs work(*args) in one thread per entry of `args_list`, all at once, and returns the
    exceptions they raised. `switch_interval`: sys.setswitchinterval while they run (a tiny one makes
    the interpreter hand the GIL from thread to thread often)."""
    errors = []

    def body(*args):
        try:
            work(*args)
        except Exception as e:  # returned to the test, which reports it
            errors.append(e)

    old = sys.getswitchinterval()
    if switch_interval:
        sys.setswitchinterval(switch_interval)
    try:
        threads = [threading.Thread(target=body, args=tuple(a)) for a in args_list]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    return errors
