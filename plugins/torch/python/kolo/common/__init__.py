"""Names a Horovod script imports from horovod.common (kolo.common.exceptions)."""
