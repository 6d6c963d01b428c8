"""Network namespaces for the fault campaign (--netns): not written yet."""


class Topology:
    def __init__(self, *a):
        raise NotImplementedError("--netns is not implemented yet")
