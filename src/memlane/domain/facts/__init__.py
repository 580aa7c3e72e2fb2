"""The structured layer: entities, facts with two clocks, documents, claims and the assured reads."""
