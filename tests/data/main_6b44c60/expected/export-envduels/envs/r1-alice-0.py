class Env0:
    def __init__(self, max_turns: int = 10):
        self.max_turns = max_turns
