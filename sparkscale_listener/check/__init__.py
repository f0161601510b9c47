"""Checking: after each applied scaling, checkers (:mod:`.checker` is the interface, :mod:`.builtin`
the built-in ones, :mod:`.loading` builds them from the configuration) judge whether the application
is still healthy; the :mod:`.guard` rolls a bad scaling back and the :mod:`.pause` keeps scaling off
for a while after."""
