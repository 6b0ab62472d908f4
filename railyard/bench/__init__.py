"""`make bench`: named sections of measurements, a table, and .railyard/bench/latest.json."""
