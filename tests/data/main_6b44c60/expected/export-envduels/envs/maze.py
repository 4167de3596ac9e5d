class Env4:
    def __init__(self, max_turns: int = 14):
        self.max_turns = max_turns
