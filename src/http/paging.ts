/** `Link` header value naming the next page: the request URL with `starting_after` set to the page's last id. */
export function nextLink(requestUrl: string, lastId: string): string {
  const url = new URL(requestUrl);
  url.searchParams.set("starting_after", lastId);
  return `<${url.toString()}>; rel="next"`;
}
