"""Resources: pools, resources and their health, leases, acquisition algorithms, the bus.

Layer 3: imports plugins and the vocabulary (independent of store).
"""
