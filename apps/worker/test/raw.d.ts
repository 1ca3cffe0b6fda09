/** Files imported as text through Vite's `?raw` suffix (read at transform time, in Node). */
declare module "*?raw" {
  const text: string;
  export default text;
}
