// Intentionally empty: lets a library target exist before its area has sources.
