"""What the pages draw: cards, charts, tables and the sections of Benchmark, Compare, History and Tune."""
