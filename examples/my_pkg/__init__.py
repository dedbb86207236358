"""An example TurnRL env outside the project: importing ``my_pkg`` registers ``MyPkg/GuessNumber-v0``.

PYTHONPATH=examples python -c "import gymnasium as gym, my_pkg; print(gym.make('MyPkg/GuessNumber-v0'))"
"""

import gymnasium as gym

if "MyPkg/GuessNumber-v0" not in gym.registry:  # importing twice (a test, a worker process) registers once
    gym.register("MyPkg/GuessNumber-v0", entry_point="my_pkg.env:GuessNumberEnv")
