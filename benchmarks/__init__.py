"""framefuse's benchmark suite. Run `python -m benchmarks.run --help` from the repository root."""
