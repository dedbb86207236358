"""Optional integrations with other RL engines (verl, SkyRL, Ray); each is an extra, imported only when used."""
