"""gpuwarden analyzer."""
