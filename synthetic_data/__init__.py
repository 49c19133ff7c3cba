"""memlens synthetic_data: builders of every dataset the experiments use."""
