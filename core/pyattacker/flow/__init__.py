"""What a user declares: tasks, chains and pipelines, handoffs, retry policy.

Layer 4: imports resources, store, plugins and the vocabulary.
"""
