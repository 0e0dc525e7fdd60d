"""Claims: the five papers' claims as data and the engine that judges them against records."""
