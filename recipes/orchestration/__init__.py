"""What runs the stages: the plan of a run (stage_plan.py), the pipeline (`memlens run` / `train`), the
preflight check (`memlens check`) and the job launcher (`launcher.kind=local|slurm`)."""
