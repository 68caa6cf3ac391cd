"""The lab's plumbing, shared by the runner (``ccplab.run``), the datapath benchmark
(``ccplab.dpbench``) and ``ccplab clean`` (``ccplab.cleanup``):

    locks      the host's netlab lock (real flows) and ccp claim (one ccp run per host)
    processes  daemons with a log, started and waited for until ready, stopped in order, and dying
               with the runner; short-lived tools run to their end
    netns      commands inside a network namespace, a veth pair between two, a listener's
               readiness, a namespace's removal
"""
