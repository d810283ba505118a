"""What the ``list_*`` methods return: every item of a listing, fetched a page at a time as
iteration reaches it, and any one page on request (``page``), for a caller that shows a page
and hands its token back later (the CLI's ``--limit`` and ``--page-token``).

Both fetch through the listing's one description (``calls.Paged.page``), so walking and
paging send the same requests, in the blocking and in the asyncio client alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

from tikk.client.results import Page

T = TypeVar("T")


class Listing(Iterator[T]):
    """A listing of the blocking ``Client``. Iterating walks every page from the first,
    fetching the next one when the previous one is used up; ``page`` fetches one page and
    leaves the iteration where it is. Each fetch raises the client's errors
    (``ClientError``)."""

    def __init__(self, fetch: Callable[[str], Page[T]]) -> None:
        self._fetch = fetch
        self._walk = self._items()

    def page(self, token: str = "") -> Page[T]:
        """The page at ``token``: "" for the first, then the ``next_page_token`` of the page
        before (empty on the last page). A token means something only to the listing that
        gave it (the same method and arguments); a malformed one is refused with
        ``InvalidArgumentError``."""
        return self._fetch(token)

    def __next__(self) -> T:
        return next(self._walk)

    def _items(self) -> Iterator[T]:
        token = ""
        while True:
            page = self._fetch(token)
            yield from page.items
            token = page.next_page_token
            if not token:
                return


class AsyncListing(AsyncIterator[T]):
    """A listing of the ``AsyncClient``: ``async for`` walks every page, ``await
    listing.page(token)`` fetches one; otherwise as ``Listing``."""

    def __init__(self, fetch: Callable[[str], Awaitable[Page[T]]]) -> None:
        self._fetch = fetch
        self._walk = self._items()

    async def page(self, token: str = "") -> Page[T]:
        """As ``Listing.page``."""
        return await self._fetch(token)

    async def __anext__(self) -> T:
        return await anext(self._walk)

    async def _items(self) -> AsyncIterator[T]:
        token = ""
        while True:
            page = await self._fetch(token)
            for item in page.items:
                yield item
            token = page.next_page_token
            if not token:
                return
