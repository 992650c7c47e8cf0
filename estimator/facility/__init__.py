"""The room a node stands in: its power, heat, racks and cooling air.

``rack`` (watts per node, heat, how many nodes fit a rack by power and by space: the one implementation the
estimate's host sizing and the TCO model share) and ``airflow`` (the cooling air a node needs). This face imports
nothing, so loading it does not load the others.
"""
