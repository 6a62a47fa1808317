"""Fault-injection harness: crash, stop and break real runs, then prove the resume promises.

The child process (``tests.faults.child``) runs a small pipeline workload against a real store
and crashes itself at a chosen store write (``SelfKillingStore``) or is signalled from outside;
the parent (``tests.faults.harness``) snapshots the store with its own readers, resumes, and
judges structural invariants (``tests.faults.criteria``) with evidence gathered outside the
library: the audit ledger that every task execution appends to.
"""
