"""runstate where agents already live: ``langgraph`` (LangGraph's checkpointer
interface), with the ``runstate[langgraph]`` extra."""
