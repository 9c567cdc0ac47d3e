"""Wake-ups: how processes tell each other, after a commit, that jobs became due or ended, so
that idle workers and waiters need not wait for their next poll or read. A hint, never needed for
correctness. Not SQL: the store's dialects only say which channel their database has.

==========================  ===========================================================
:mod:`.channels`            where notices travel: PostgreSQL's ``NOTIFY``, Redis pub/sub
:mod:`.notices`             ``Wakeups``, what a process uses: the sender, the listener
:mod:`.end_watches`         what a waiter waits on between its reads of a job
==========================  ===========================================================
"""
