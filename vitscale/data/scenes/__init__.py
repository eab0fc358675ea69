"""The scenes world: several parts over clutter, labels of identity and structure (:mod:`.world`)."""
