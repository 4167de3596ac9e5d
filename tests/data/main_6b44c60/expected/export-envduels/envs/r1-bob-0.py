class Env2:
    def __init__(self, max_turns: int = 12):
        self.max_turns = max_turns
