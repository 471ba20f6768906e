"""What the container and its tasks do with their stores: restore them before processing, commit them
through the configured state backends, create their resources at start, check their config.

Kept apart from the store engines and layouts one level up, which the backends use: the managers
sit above the backends, the backends above the engines.
"""
