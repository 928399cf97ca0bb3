"""The dashboard's Sessions panel (a stub until the panel lands: registers nothing)."""


def register(register):
    pass
