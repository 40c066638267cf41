/** Reading Prometheus text exposition in tests. */

/** The value of one series, written exactly as exposed (`name{label="value"}`), or undefined if absent. */
export function sampleOf(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}
