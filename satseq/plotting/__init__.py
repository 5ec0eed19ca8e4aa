"""The training dashboard (``satseq plot RUN_DIR``).

:mod:`satseq.plotting.dashboard` draws the figure and chooses the layout through the method registry;
:mod:`satseq.plotting.common` holds what the layouts share. Each method's six panels live with the
method (``satseq/methods/<name>/dashboard.py``) and import only :mod:`satseq.plotting.common`.
Nothing is imported here: import the submodule you need.
"""
