"""`sparkmirror failover`: move consumers from a mirror's source to its target, losing and repeating nothing.

- `stop.py`: the mirror's flow groups stop at a consistent point (a failover mark, then fencing);
- `offsets.py`: each consumer group's committed source offsets, translated exactly through the progress topic
  (or, when the source is gone, its last checkpoints on the target), committed to the group on the target;
- `report.py`: what was done per group and partition (pure), its table and document, the exit status;
- `cli.py`: the command.
"""
