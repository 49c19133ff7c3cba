"""Paper 004's formal-language study, its training side: the models trained on each language and scored at
every epoch (language_models.py). The study's other files are listed in docs/architecture.md."""
