"""ccplab: run congestion-control experiments through an emulated bottleneck.

Data flows one way: trace -> emulated link (``ccplab-link``) -> per-packet
mahimahi log -> analysis (the ``transient`` package) -> report.

Modules:
    cca        parse and check a CCA name (``kernel:cubic``, ``ccp:reno``)
    registry   the algorithm suite as `ccp-algorithms --list-json` declares it (algorithms/src/suite.rs)
    binaries   where the project's built binaries are
    plumbing   the host side: locks, daemons and their readiness, network namespaces
    scenario   an experiment scenario and its step-change trace
    run        one flow through the link, saved as a run directory
    compare    several CCAs x several runs of one scenario, then the report
    cli        the ``ccplab`` command
"""

__version__ = "0.1.0"
