class Env3:
    def __init__(self, max_turns: int = 13):
        self.max_turns = max_turns
