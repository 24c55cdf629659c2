"""The decisions of the JIT's slow path: which topology a group is (:mod:`.groups`), the one exchange of an
exchanged call (:mod:`.exchange`), which calls need none (:mod:`.prediction`), how ranks agree on plans
(:mod:`.agreement`), the measured choice between a plan and its direct plan (:mod:`.tuning`), and where plans
come from (:mod:`.compiling`). Nothing here runs on a call the fast path replays, except O(1) bookkeeping."""
