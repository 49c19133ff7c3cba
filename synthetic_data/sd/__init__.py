"""SD, paper 003's synthetic data (Sec. 4.1, App. J): Python programs for the fictitious `legitimate_crypto` library,
written procedurally. programs.py is the entry (program generation, layout, SD.Base rows); writer.py, task_operations.py
and lengthening_operations.py write a program's pieces. SD.Links is synthetic_data/links.py."""
