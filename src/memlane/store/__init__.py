"""The store layer: all SQL that reads or writes the database. The items per backend behind ``Store``; the
access records, saved queries and facts as one function per statement over a session of either backend; the
query space's views, fence and runners. A module of this layer imports only this layer and the values
(``memlane.values``).
"""
