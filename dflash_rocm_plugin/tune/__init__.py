"""``dflash-rocm tune``: launch choices measured on the user's own GPU, kept where they win.

Modules: ``space`` (shape classes, buckets, the fields swept per architecture), ``measure`` (one
bucket's inputs and reference; a candidate checked, then timed), ``search`` (the sweep of one
bucket and the never-lose-to-the-default rule), ``driver`` (buckets within a budget, the file
written), ``output`` (file merge, table, JSON, progress), ``cli`` (the command).  The file format
and where it is read from belong to the ops layer (``ops.tuned_document``, ``ops.tuned_configs``).
"""
