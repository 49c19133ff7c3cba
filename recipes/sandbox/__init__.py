"""The sandbox that runs model-written code for verifiable rewards (bubblewrap; docs/sandbox.md): runner.py
starts the program and grader processes, whose code is program.py and grader.py, talking JSON frames (codec.py)."""
